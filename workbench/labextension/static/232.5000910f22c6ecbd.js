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

/* Stacks: a line per task, its stacks folded under it */
.wb-run-stacks:empty {
  display: none;
}

.wb-run-stacks {
  margin-top: 4px;
  font-size: var(--jp-ui-font-size0);
}

.wb-stacks-head {
  display: flex;
  justify-content: space-between;
  color: var(--jp-ui-font-color2);
}

.wb-stacks-close {
  border: none;
  background: none;
  color: var(--jp-ui-font-color2);
  cursor: pointer;
}

.wb-stacks-state {
  color: var(--jp-ui-font-color2);
}

.wb-stacks-task pre {
  font-family: var(--jp-code-font-family);
  font-size: var(--jp-code-font-size);
  max-height: 240px;
  overflow: auto;
  white-space: pre;
  margin: 2px 0 4px;
  padding: 4px;
  background: var(--jp-layout-color2);
}
`,""]),r.d(t,{},{A:s})},314(e){e.exports=function(e){var t=[];return t.toString=function(){return this.map(function(t){var r="",n=void 0!==t[5];return t[4]&&(r+="@supports (".concat(t[4],") {")),t[2]&&(r+="@media ".concat(t[2]," {")),n&&(r+="@layer".concat(t[5].length>0?" ".concat(t[5]):""," {")),r+=e(t),n&&(r+="}"),t[2]&&(r+="}"),t[4]&&(r+="}"),r}).join("")},t.i=function(e,r,n,o,a){"string"==typeof e&&(e=[[null,e,void 0]]);var s={};if(n)for(var i=0;i<this.length;i++){var c=this[i][0];null!=c&&(s[c]=!0)}for(var p=0;p<e.length;p++){var u=[].concat(e[p]);n&&s[u[0]]||(void 0!==a&&(void 0===u[5]||(u[1]="@layer".concat(u[5].length>0?" ".concat(u[5]):""," {").concat(u[1],"}")),u[5]=a),r&&(u[2]&&(u[1]="@media ".concat(u[2]," {").concat(u[1],"}")),u[2]=r),o&&(u[4]?(u[1]="@supports (".concat(u[4],") {").concat(u[1],"}"),u[4]=o):u[4]="".concat(o)),t.push(u))}},t}},601(e){e.exports=function(e){return e[1]}},72(e){var t=[];function r(e){for(var r=-1,n=0;n<t.length;n++)if(t[n].identifier===e){r=n;break}return r}function n(e,n){for(var o={},a=[],s=0;s<e.length;s++){var i=e[s],c=n.base?i[0]+n.base:i[0],p=o[c]||0,u="".concat(c," ").concat(p);o[c]=p+1;var l=r(u),d={css:i[1],media:i[2],sourceMap:i[3],supports:i[4],layer:i[5]};if(-1!==l)t[l].references++,t[l].updater(d);else{var f=function(e,t){var r=t.domAPI(t);return r.update(e),function(t){t?(t.css!==e.css||t.media!==e.media||t.sourceMap!==e.sourceMap||t.supports!==e.supports||t.layer!==e.layer)&&r.update(e=t):r.remove()}}(d,n);n.byIndex=s,t.splice(s,0,{identifier:u,updater:f,references:1})}a.push(u)}return a}e.exports=function(e,o){var a=n(e=e||[],o=o||{});return function(e){e=e||[];for(var s=0;s<a.length;s++){var i=r(a[s]);t[i].references--}for(var c=n(e,o),p=0;p<a.length;p++){var u=r(a[p]);0===t[u].references&&(t[u].updater(),t.splice(u,1))}a=c}}},659(e){var t={};e.exports=function(e,r){var n=function(e){if(void 0===t[e]){var r=document.querySelector(e);if(window.HTMLIFrameElement&&r instanceof window.HTMLIFrameElement)try{r=r.contentDocument.head}catch(e){r=null}t[e]=r}return t[e]}(e);if(!n)throw Error("Couldn't find a style target. This probably means that the value for the 'insert' parameter is invalid.");n.appendChild(r)}},540(e){e.exports=function(e){var t=document.createElement("style");return e.setAttributes(t,e.attributes),e.insert(t,e.options),t}},56(e,t,r){e.exports=function(e){var t=r.nc;t&&e.setAttribute("nonce",t)}},825(e){e.exports=function(e){if("u"<typeof document)return{update:function(){},remove:function(){}};var t=e.insertStyleElement(e);return{update:function(r){var n,o,a;n="",r.supports&&(n+="@supports (".concat(r.supports,") {")),r.media&&(n+="@media ".concat(r.media," {")),(o=void 0!==r.layer)&&(n+="@layer".concat(r.layer.length>0?" ".concat(r.layer):""," {")),n+=r.css,o&&(n+="}"),r.media&&(n+="}"),r.supports&&(n+="}"),(a=r.sourceMap)&&"u">typeof btoa&&(n+="\n/*# sourceMappingURL=data:application/json;base64,".concat(btoa(unescape(encodeURIComponent(JSON.stringify(a))))," */")),e.styleTagTransform(n,t,e.options)},remove:function(){var e;null===(e=t).parentNode||e.parentNode.removeChild(e)}}}},113(e){e.exports=function(e,t){if(t.styleSheet)t.styleSheet.cssText=e;else{for(;t.firstChild;)t.removeChild(t.firstChild);t.appendChild(document.createTextNode(e))}}},579(e,t,r){var n=r(72),o=r.n(n),a=r(825),s=r.n(a),i=r(659),c=r.n(i),p=r(56),u=r.n(p),l=r(540),d=r.n(l),f=r(113),b=r.n(f),v=r(475),h={};h.styleTagTransform=b(),h.setAttributes=u(),h.insert=c().bind(null,"head"),h.domAPI=s(),h.insertStyleElement=d(),o()(v.A,h),v.A&&v.A.locals&&v.A.locals}}]);