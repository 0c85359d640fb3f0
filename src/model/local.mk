# sources of src/model
