/* bytes2npy IN OUT.npy: byte-level tokens of any file (vocabulary 256), as a
 * uint16 .npy that `roundpipe train --data` reads. A small example of the
 * library's .npy writer. */
#include <stdio.h>
#include <stdlib.h>

#include "io/npy.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s INPUT OUTPUT.npy\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    size_t cap = 1 << 16, n = 0;
    unsigned char *bytes = malloc(cap);
    size_t got;
    while (bytes && (got = fread(bytes + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            unsigned char *b = realloc(bytes, cap *= 2);
            if (!b) {
                free(bytes);
                bytes = NULL;
            }
            bytes = b;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!bytes || bad) {
        fprintf(stderr, "%s: %s\n", argv[1], bad ? "read error" : "out of memory");
        free(bytes);
        return 1;
    }
    uint16_t *tok = malloc((n ? n : 1) * sizeof *tok);
    if (!tok) {
        fprintf(stderr, "out of memory\n");
        free(bytes);
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        tok[i] = bytes[i];
    rp_error err = {0};
    rp_status s = rp_npy_write_u16(argv[2], tok, (int64_t)n, &err);
    free(tok);
    free(bytes);
    if (s != RP_OK) {
        fprintf(stderr, "bytes2npy: %s\n", err.msg);
        return 1;
    }
    return 0;
}
