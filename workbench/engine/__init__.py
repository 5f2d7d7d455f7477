"""Code that runs inside ipyparallel engines. TensorFlow is imported here only."""
