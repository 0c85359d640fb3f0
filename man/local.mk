dist_man_MANS += man/roundpipe.1 man/roundpipe.3 man/roundpipe-formats.5
