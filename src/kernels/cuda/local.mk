# sources of src/kernels/cuda
