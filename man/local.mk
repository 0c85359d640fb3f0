dist_man_MANS += man/roundpipe.1 man/roundpipe.3 man/roundpipe-formats.5 man/roundpipe-prepare.1 man/roundpipe-plot.1

# `man rp_train` and the other API functions: one-line pages that source
# roundpipe(3), installed beside it.
RP_MAN3_LINKS = rp_train rp_train_config_create rp_train_config_set rp_train_config_error \
	rp_train_config_destroy rp_train_config_set_step_callback rp_status_string \
	rp_version_string rp_interrupt rp_interrupted rp_request_checkpoint rp_checkpoint_requested
install-man-links:
	$(MKDIR_P) '$(DESTDIR)$(man3dir)'
	for f in $(RP_MAN3_LINKS); do \
	  echo '.so man3/roundpipe.3' > '$(DESTDIR)$(man3dir)'/$$f.3 || exit 1; \
	done
uninstall-man-links:
	for f in $(RP_MAN3_LINKS); do rm -f '$(DESTDIR)$(man3dir)'/$$f.3; done
.PHONY: install-man-links uninstall-man-links
