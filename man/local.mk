# sources of man
