/* RP_CPU_CLONES: compile a hot CPU function twice (GCC's target_clones),
 * for the baseline x86-64 and for x86-64-v3 (AVX2, FMA), and pick the clone
 * at load time by what the processor has. Bits do not change between the
 * clones: the library is built as ISO C (-std=c11), where GCC contracts no
 * a*b+c into a fused multiply-add, so the v3 clone runs the same roundings
 * in wider vectors; a function that wants a fused multiply-add says fmaf,
 * which is exactly rounded in both (optim/adamw.c). OpenMP outlines the
 * body of a parallel loop into a function of its own, which the clones do
 * not reach: give the clones a function the loop body calls.
 * Not under ThreadSanitizer: the loader runs a clone's resolver while it
 * relocates the program, before TSan's run-time is up, and the resolver's
 * instrumented code crashes there (every command, at start). */
#ifndef RP_CORE_CPU_CLONES_H
#define RP_CORE_CPU_CLONES_H

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && __GNUC__ >= 11 && \
    !defined(__SANITIZE_THREAD__)
#define RP_CPU_CLONES __attribute__((target_clones("default", "arch=x86-64-v3")))
#else
#define RP_CPU_CLONES
#endif

#endif
