# sources of bench
