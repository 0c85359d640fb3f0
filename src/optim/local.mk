# sources of src/optim
