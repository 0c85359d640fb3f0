# sources of src/engine
