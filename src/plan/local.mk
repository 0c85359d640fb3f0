# sources of src/plan
