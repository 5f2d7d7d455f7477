"""Code that runs in the notebook kernel (the client): no TensorFlow here."""
