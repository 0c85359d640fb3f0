# sources of src/cli
