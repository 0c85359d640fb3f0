dist_man_MANS += man/roundpipe.1
