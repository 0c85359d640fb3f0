# sources of examples
