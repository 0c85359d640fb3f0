# sources of src/io
