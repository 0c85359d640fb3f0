# Examples: the byte-level tokenizer and the demo data it makes at build time.
# `make install` copies them, with the API example's source and the Slurm
# scripts, to $(examplesdir) (pkg-config --variable=examplesdir roundpipe).
examplesdir = $(pkgdatadir)/examples
examples_PROGRAMS = examples/bytes2npy
examples_bytes2npy_SOURCES = examples/bytes2npy.c
examples_bytes2npy_LDADD = librp.la

noinst_DATA += examples/data/gnu-licenses.npy
examplesdatadir = $(examplesdir)/data
nodist_examplesdata_DATA = examples/data/gnu-licenses.npy
dist_examplesdata_DATA = examples/data/gnu-licenses.txt examples/data/README.md
dist_examples_DATA = examples/tiny-config.json examples/train_api.c
examples/data/gnu-licenses.npy: examples/bytes2npy$(EXEEXT) $(srcdir)/examples/data/gnu-licenses.txt
	@mkdir -p examples/data
	$(AM_V_GEN)examples/bytes2npy$(EXEEXT) $(srcdir)/examples/data/gnu-licenses.txt $@
CLEANFILES += examples/data/gnu-licenses.npy
EXTRA_DIST += examples/run-default.sh

# The public API, linked the way an MPI application links it.
noinst_PROGRAMS += examples/train_api
examples_train_api_SOURCES = examples/train_api.c
examples_train_api_LDADD = libroundpipe.la

# Slurm batch scripts (README.md, "Slurm").
examplesslurmdir = $(examplesdir)/slurm
dist_examplesslurm_DATA = examples/slurm/single-node.sbatch examples/slurm/multi-node.sbatch
