# sources of fuzz
