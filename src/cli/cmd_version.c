/* `roundpipe version [--verbose]`: the version, and with --verbose what this
 * build and this machine bring to a run, one "what: value" line each, for
 * a bug report (as DeepSpeed's ds_report or PyTorch's collect_env): the
 * compiler and CUDA toolkit built with, MPI, hwloc, json-c and the BLAS
 * loaded, the processor and its exp kernel, memory and /dev/shm, the GPU
 * the device probe finds (or why none is usable), cuBLAS's and cuDNN's
 * files as a run would open them, and the environment variables that
 * change a run. Needs no MPI launch and starts nothing on a GPU but the
 * probe's context. */
#include "config.h"

#include <hwloc.h>
#include <json-c/json.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cli/commands.h"
#include "device/device.h"
#include "kernels/cpu/expf_vector.h"
#include "kernels/dynlib.h"
#include "roundpipe.h"
#include "store/shm.h"

#ifdef RP_HAVE_CUDA
#include "kernels/cuda/cublas_api.h"
#include "kernels/cuda/cuda_probe.h"
#endif
#ifdef RP_HAVE_CUDNN
#include "kernels/cudnn_loader.h"
#endif

static const char version_usage[] =
    "usage: roundpipe version [--verbose]\n"
    "  --verbose, -v  also what this build and this machine bring to a run\n"
    "                 (libraries, processor, memory, GPU, cuBLAS and cuDNN\n"
    "                 files, environment): attach it to a bug report\n";

static double gib(unsigned long long bytes)
{
    return (double)bytes / (1024.0 * 1024.0 * 1024.0);
}

static void print_build(void)
{
#if defined(__clang__)
    printf("compiler: clang %s\n", __clang_version__);
#elif defined(__GNUC__)
    printf("compiler: gcc %s\n", __VERSION__);
#else
    printf("compiler: unknown\n");
#endif
#ifdef RP_HAVE_CUDA
    int built = 0, runtime = 0, driver = 0;
    rp_cuda_versions(&built, &runtime, &driver);
    printf("CUDA: built with toolkit %d.%d for sm %s; runtime %d.%d; driver ", built / 1000,
           built % 1000 / 10, RP_CUDA_ARCHS, runtime / 1000, runtime % 1000 / 10);
    if (driver)
        printf("supports up to %d.%d\n", driver / 1000, driver % 1000 / 10);
    else
        printf("none found\n");
#else
    printf("CUDA: not built (configure found no CUDA toolkit, or --without-cuda): CPU "
           "executors only\n");
#endif
}

static void print_libraries(void)
{
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0, major = 0, minor = 0;
    MPI_Get_library_version(mpi, &len); /* callable before MPI_Init */
    MPI_Get_version(&major, &minor);
    mpi[strcspn(mpi, "\n")] = '\0';
    printf("MPI: %s (MPI %d.%d)\n", mpi, major, minor);
    unsigned run = hwloc_get_api_version();
    printf("hwloc: API %u.%u.%u at run time, %u.%u.%u built against\n", run >> 16, run >> 8 & 0xff,
           run & 0xff, (unsigned)HWLOC_API_VERSION >> 16, (unsigned)HWLOC_API_VERSION >> 8 & 0xff,
           (unsigned)HWLOC_API_VERSION & 0xff);
    printf("json-c: %s\n", json_c_version());
}

/* Cores, packages and NUMA nodes as hwloc sees this process's machine. */
static void print_processor(const rp_device_info *cpu)
{
    hwloc_topology_t topo;
    int cores = -1, packages = -1, numa = -1;
    if (hwloc_topology_init(&topo) == 0) {
        if (hwloc_topology_load(topo) == 0) {
            cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
            packages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
            numa = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
        }
        hwloc_topology_destroy(topo);
    }
    printf("processor: %s; %d core(s) in %d package(s), %d NUMA node(s), %ld logical CPU(s) "
           "online\n",
           cpu->name, cores, packages, numa, sysconf(_SC_NPROCESSORS_ONLN));
    printf("CPU BLAS: %s\n", cpu->library);
    printf("%s\n", rp_expf_vector_note());
    printf("memory: %.1f GiB, %.1f GiB available\n", gib(cpu->memory_bytes),
           gib(rp_device_host_available_bytes()));
    struct statvfs v;
    if (statvfs(RP_SHM_DEFAULT_DIR, &v) == 0)
        printf("host store (%s): %.1f GiB free of %.1f GiB\n", RP_SHM_DEFAULT_DIR,
               gib((unsigned long long)v.f_bavail * v.f_frsize),
               gib((unsigned long long)v.f_blocks * v.f_frsize));
    else
        printf("host store (%s): cannot be read\n", RP_SHM_DEFAULT_DIR);
}

static void print_gpu(void)
{
    rp_device_info info;
    rp_error err = {0};
    if (rp_device_probe(RP_DEVICE_CUDA, &info, &err) == RP_OK)
        printf("GPU: %d usable; GPU 0: %s, sm_%d, %.1f GiB (%.1f GiB free)\n", info.count,
               info.name, info.sm, gib(info.memory_bytes), gib(info.free_bytes));
    else
        printf("GPU: none usable: %s\n", err.msg);
#ifdef RP_HAVE_CUDA
    char why[512] = "";
    char blas[512], lt[512];
    if (rp_cublas_open(why, sizeof why) == 0) {
        rp_dynlib_file_of((const void *)rp_cublas.create, blas, sizeof blas);
        rp_dynlib_file_of((const void *)rp_cublas.lt_create, lt, sizeof lt);
        printf("cuBLAS: %s (%s); cuBLASLt: %s (%s)\n", rp_cublas_path(0), blas, rp_cublas_path(1),
               lt);
    } else
        printf("cuBLAS: not loadable: %s\n", why);
#endif
#ifdef RP_HAVE_CUDNN
    rp_cudnn_library lib;
    char cwhy[512] = "";
    if (rp_cudnn_library_open(&lib, cwhy, sizeof cwhy) == 0) {
        char file[512];
        rp_dynlib_file_of(lib.symbols[0], file, sizeof file);
        printf("cuDNN: %zu.%zu.%zu, %s (%s)\n", lib.version / 10000, lib.version % 10000 / 100,
               lib.version % 100, lib.path, file);
        rp_cudnn_library_close(&lib);
    } else {
        printf("cuDNN: not loadable (--attention own): %s\n", cwhy);
    }
#elif defined(RP_HAVE_CUDA)
    printf("cuDNN: not built (configure found no cuDNN 9 headers): --attention own\n");
#endif
}

/* The variables that change what a run does, as set here. */
static void print_environment(void)
{
    extern char **environ;
    static const char *const others[] = {"CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS",
                                         "OPENBLAS_NUM_THREADS", NULL};
    int any = 0;
    printf("environment:");
    for (char **e = environ; *e; e++) {
        int ours = !strncmp(*e, "RP_", 3);
        for (int i = 0; !ours && others[i]; i++)
            ours = !strncmp(*e, others[i], strlen(others[i])) && (*e)[strlen(others[i])] == '=';
        if (ours) {
            printf(" %s", *e);
            any = 1;
        }
    }
    fputs(any ? "\n"
              : " none of RP_*, CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS, OPENBLAS_NUM_THREADS set\n",
          stdout);
}

int rp_cli_version(int argc, char **argv)
{
    int verbose = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--verbose") || !strcmp(argv[i], "-v")) {
            verbose = 1;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(version_usage, stdout);
            return 0;
        } else {
            fprintf(stderr, "roundpipe version: unknown option '%s'\n%s", argv[i], version_usage);
            return 2;
        }
    }
    printf("roundpipe %s\n", rp_version_string());
    if (!verbose)
        return 0;
    rp_device_info cpu;
    rp_error err = {0};
    if (rp_device_probe(RP_DEVICE_CPU, &cpu, &err) != RP_OK) {
        fprintf(stderr, "roundpipe version: %s\n", err.msg);
        return 1;
    }
    print_build();
    print_libraries();
    print_processor(&cpu);
    print_gpu();
    print_environment();
    fflush(stdout);
    return 0;
}
