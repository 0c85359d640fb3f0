# sources of src/device
