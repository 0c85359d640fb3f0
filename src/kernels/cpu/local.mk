# sources of src/kernels/cpu
