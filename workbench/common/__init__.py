"""Pure logic shared by the kernel and the engines: no TensorFlow, no ipyparallel."""
