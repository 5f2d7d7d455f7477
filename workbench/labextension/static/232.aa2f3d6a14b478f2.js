"use strict";(self.rspackChunkworkbench_panel=self.rspackChunkworkbench_panel||[]).push([[232],{475(e,t,r){var n=r(601),o=r.n(n),a=r(314),s=(r.n(a))()(o());s.push([e.id,`.wb-panel {
  background: var(--jp-layout-color1);
  color: var(--jp-ui-font-color1);
  font-size: var(--jp-ui-font-size1);
  overflow-y: auto;
  padding: 6px 8px;
}

.wb-panel h3 {
  font-size: var(--jp-ui-font-size2);
  margin: 8px 0 4px;
}

.wb-run,
.wb-cluster {
  border: 1px solid var(--jp-border-color2);
  border-radius: 3px;
  margin-bottom: 6px;
  padding: 4px 6px;
}

.wb-run-head,
.wb-run-figures {
  display: flex;
  gap: 8px;
  flex-wrap: wrap;
}

.wb-run-status {
  font-weight: 600;
}

.wb-status-running .wb-run-status {
  color: var(--jp-success-color1);
}

.wb-status-failed .wb-run-status,
.wb-status-lost .wb-run-status,
.wb-run-error {
  color: var(--jp-error-color1);
}

.wb-run-dir,
.wb-home,
.wb-cluster-notebook {
  color: var(--jp-ui-font-color2);
  font-size: var(--jp-ui-font-size0);
  overflow: hidden;
  text-overflow: ellipsis;
  white-space: nowrap;
}

.wb-engines {
  border-collapse: collapse;
  width: 100%;
}

.wb-engines th,
.wb-engines td {
  padding: 1px 4px;
  text-align: left;
}

/* JupyterLab's styled buttons (jp-mod-styled: 32 px high, 12 px apart), sized for a sidebar */
.wb-panel button.wb-btn {
  border-radius: var(--jp-border-radius);
  height: 24px;
  line-height: 24px;
  margin: 4px 6px 0 0;
  padding: 0 10px;
}

.wb-panel button.wb-btn:disabled {
  cursor: default;
  opacity: 0.5;
}

.wb-message {
  color: var(--jp-ui-font-color2);
  margin-bottom: 4px;
}
`,""]),r.d(t,{},{A:s})},314(e){e.exports=function(e){var t=[];return t.toString=function(){return this.map(function(t){var r="",n=void 0!==t[5];return t[4]&&(r+="@supports (".concat(t[4],") {")),t[2]&&(r+="@media ".concat(t[2]," {")),n&&(r+="@layer".concat(t[5].length>0?" ".concat(t[5]):""," {")),r+=e(t),n&&(r+="}"),t[2]&&(r+="}"),t[4]&&(r+="}"),r}).join("")},t.i=function(e,r,n,o,a){"string"==typeof e&&(e=[[null,e,void 0]]);var s={};if(n)for(var i=0;i<this.length;i++){var c=this[i][0];null!=c&&(s[c]=!0)}for(var u=0;u<e.length;u++){var p=[].concat(e[u]);n&&s[p[0]]||(void 0!==a&&(void 0===p[5]||(p[1]="@layer".concat(p[5].length>0?" ".concat(p[5]):""," {").concat(p[1],"}")),p[5]=a),r&&(p[2]&&(p[1]="@media ".concat(p[2]," {").concat(p[1],"}")),p[2]=r),o&&(p[4]?(p[1]="@supports (".concat(p[4],") {").concat(p[1],"}"),p[4]=o):p[4]="".concat(o)),t.push(p))}},t}},601(e){e.exports=function(e){return e[1]}},72(e){var t=[];function r(e){for(var r=-1,n=0;n<t.length;n++)if(t[n].identifier===e){r=n;break}return r}function n(e,n){for(var o={},a=[],s=0;s<e.length;s++){var i=e[s],c=n.base?i[0]+n.base:i[0],u=o[c]||0,p="".concat(c," ").concat(u);o[c]=u+1;var l=r(p),d={css:i[1],media:i[2],sourceMap:i[3],supports:i[4],layer:i[5]};if(-1!==l)t[l].references++,t[l].updater(d);else{var f=function(e,t){var r=t.domAPI(t);return r.update(e),function(t){t?(t.css!==e.css||t.media!==e.media||t.sourceMap!==e.sourceMap||t.supports!==e.supports||t.layer!==e.layer)&&r.update(e=t):r.remove()}}(d,n);n.byIndex=s,t.splice(s,0,{identifier:p,updater:f,references:1})}a.push(p)}return a}e.exports=function(e,o){var a=n(e=e||[],o=o||{});return function(e){e=e||[];for(var s=0;s<a.length;s++){var i=r(a[s]);t[i].references--}for(var c=n(e,o),u=0;u<a.length;u++){var p=r(a[u]);0===t[p].references&&(t[p].updater(),t.splice(p,1))}a=c}}},659(e){var t={};e.exports=function(e,r){var n=function(e){if(void 0===t[e]){var r=document.querySelector(e);if(window.HTMLIFrameElement&&r instanceof window.HTMLIFrameElement)try{r=r.contentDocument.head}catch(e){r=null}t[e]=r}return t[e]}(e);if(!n)throw Error("Couldn't find a style target. This probably means that the value for the 'insert' parameter is invalid.");n.appendChild(r)}},540(e){e.exports=function(e){var t=document.createElement("style");return e.setAttributes(t,e.attributes),e.insert(t,e.options),t}},56(e,t,r){e.exports=function(e){var t=r.nc;t&&e.setAttribute("nonce",t)}},825(e){e.exports=function(e){if("u"<typeof document)return{update:function(){},remove:function(){}};var t=e.insertStyleElement(e);return{update:function(r){var n,o,a;n="",r.supports&&(n+="@supports (".concat(r.supports,") {")),r.media&&(n+="@media ".concat(r.media," {")),(o=void 0!==r.layer)&&(n+="@layer".concat(r.layer.length>0?" ".concat(r.layer):""," {")),n+=r.css,o&&(n+="}"),r.media&&(n+="}"),r.supports&&(n+="}"),(a=r.sourceMap)&&"u">typeof btoa&&(n+="\n/*# sourceMappingURL=data:application/json;base64,".concat(btoa(unescape(encodeURIComponent(JSON.stringify(a))))," */")),e.styleTagTransform(n,t,e.options)},remove:function(){var e;null===(e=t).parentNode||e.parentNode.removeChild(e)}}}},113(e){e.exports=function(e,t){if(t.styleSheet)t.styleSheet.cssText=e;else{for(;t.firstChild;)t.removeChild(t.firstChild);t.appendChild(document.createTextNode(e))}}},579(e,t,r){var n=r(72),o=r.n(n),a=r(825),s=r.n(a),i=r(659),c=r.n(i),u=r(56),p=r.n(u),l=r(540),d=r.n(l),f=r(113),b=r.n(f),v=r(475),h={};h.styleTagTransform=b(),h.setAttributes=p(),h.insert=c().bind(null,"head"),h.domAPI=s(),h.insertStyleElement=d(),o()(v.A,h),v.A&&v.A.locals&&v.A.locals}}]);