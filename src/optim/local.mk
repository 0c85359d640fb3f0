# sources of src/optim
# A convenience library of its own so that these files build with
# -fno-math-errno: without it sqrtf may set errno, which keeps GCC from
# vectorising the AdamW loop. Nothing here reads errno after a math call.
noinst_LTLIBRARIES += src/optim/librpoptim.la
src_optim_librpoptim_la_SOURCES = \
	src/optim/adamw.c src/optim/adamw.h \
	src/optim/clip.c src/optim/clip.h \
	src/optim/lr.c src/optim/lr.h
src_optim_librpoptim_la_CFLAGS = $(AM_CFLAGS) -fno-math-errno
librp_la_LIBADD += src/optim/librpoptim.la
