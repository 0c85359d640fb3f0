/* Proves: the host-store layout places named regions at offsets aligned as
 * asked, in order and without overlap; rejects empty/duplicate names, bad
 * alignments and sizes that overflow, leaving the layout unchanged; and the
 * per-layer helper gives every layer compute-dtype weights plus four fp32
 * blocks of exactly the sizes worked out by hand. */
#include <stdint.h>
#include <string.h>

#include "rp_check.h"
#include "store/layout.h"

START_TEST(regions_are_aligned_and_disjoint)
{
    rp_store_layout *l;
    rp_error err;
    ck_assert_int_eq(rp_store_layout_create(&l, &err), RP_OK);
    size_t off[4];
    ck_assert_int_eq(rp_store_layout_add(l, "a", 10, 64, &off[0], &err), RP_OK);
    ck_assert_int_eq(rp_store_layout_add(l, "b", 100, RP_STORE_ALIGN_PAGE, &off[1], &err), RP_OK);
    ck_assert_int_eq(rp_store_layout_add(l, "empty", 0, 64, &off[2], &err), RP_OK);
    ck_assert_int_eq(rp_store_layout_add(l, "c", 1, 1, &off[3], &err), RP_OK);
    ck_assert_uint_eq(off[0], 0);
    ck_assert_uint_eq(off[1], 4096);    /* 10 rounded up to a page */
    ck_assert_uint_eq(off[2], 4224);    /* 4096 + 100 = 4196, up to a multiple of 64 */
    ck_assert_uint_eq(off[3], 4224);    /* an empty region takes no room */
    ck_assert_uint_eq(rp_store_layout_bytes(l), 8192);
    ck_assert_uint_eq(rp_store_layout_count(l), 4);
    const rp_store_region *r = rp_store_layout_find(l, "b");
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(r->bytes, 100);
    ck_assert_ptr_null(rp_store_layout_find(l, "nope"));
    rp_store_layout_destroy(&l);
    ck_assert_ptr_null(l);
}
END_TEST

START_TEST(bad_regions_are_rejected_and_change_nothing)
{
    rp_store_layout *l;
    rp_error err;
    ck_assert_int_eq(rp_store_layout_create(&l, &err), RP_OK);
    ck_assert_int_eq(rp_store_layout_add(l, "x", 5, 64, NULL, &err), RP_OK);
    ck_assert_int_eq(rp_store_layout_add(l, "x", 5, 64, NULL, &err), RP_ERR_INVALID_ARG);
    ck_assert(strstr(err.msg, "'x' added twice"));
    ck_assert_int_eq(rp_store_layout_add(l, "", 5, 64, NULL, &err), RP_ERR_INVALID_ARG);
    ck_assert_int_eq(rp_store_layout_add(l, "y", 5, 48, NULL, &err), RP_ERR_INVALID_ARG);
    ck_assert(strstr(err.msg, "alignment 48"));
    ck_assert_int_eq(rp_store_layout_add(l, "y", 5, 0, NULL, &err), RP_ERR_INVALID_ARG);
    ck_assert_int_eq(rp_store_layout_add(l, "y", SIZE_MAX - 10, 64, NULL, &err), RP_ERR_RANGE);
    ck_assert(strstr(err.msg, "'y'"));
    char longname[80];
    memset(longname, 'n', sizeof longname - 1);
    longname[79] = 0;
    ck_assert_int_eq(rp_store_layout_add(l, longname, 5, 64, NULL, &err), RP_ERR_INVALID_ARG);
    ck_assert_uint_eq(rp_store_layout_count(l), 1);
    ck_assert_uint_eq(rp_store_layout_bytes(l), 4096);
    size_t off;
    ck_assert_int_eq(rp_store_layout_add(l, "z", 1, 64, &off, &err), RP_OK);
    ck_assert_uint_eq(off, 64);
    rp_store_layout_destroy(&l);
}
END_TEST

START_TEST(per_layer_blocks_have_hand_computed_sizes)
{
    rp_store_layout *l;
    rp_error err;
    ck_assert_int_eq(rp_store_layout_create(&l, &err), RP_OK);
    ck_assert_int_eq(rp_store_layout_add(l, "events", 640, RP_STORE_ALIGN_LINE, NULL, &err), RP_OK);
    /* layer 0: 3000 bf16 params, all trainable; layer 1: 5000 params, 100
     * trainable (LoRA-like); layer 2: frozen. */
    rp_store_layer_spec spec[3] = {{3000, 3000}, {5000, 100}, {7, 0}};
    rp_store_layer_regions reg[3];
    ck_assert_int_eq(rp_store_layout_add_layers(l, 3, spec, RP_BF16, reg, &err), RP_OK);
    /* events 0..640 -> layer 0 weights at 4096, 6000 bytes -> master at 12288,
     * 12000 bytes each: grads 24576, m 36864, v 49152, ends 61152. */
    ck_assert_uint_eq(reg[0].weights, 4096);
    ck_assert_uint_eq(reg[0].weights_bytes, 6000);
    ck_assert_uint_eq(reg[0].master, 12288);
    ck_assert_uint_eq(reg[0].grads, 24576);
    ck_assert_uint_eq(reg[0].adam_m, 36864);
    ck_assert_uint_eq(reg[0].adam_v, 49152);
    ck_assert_uint_eq(reg[0].fp32_bytes, 12000);
    /* layer 1 weights at 61440 (10000 bytes) -> master 73728, 400 bytes each, page apart */
    ck_assert_uint_eq(reg[1].weights, 61440);
    ck_assert_uint_eq(reg[1].master, 73728);
    ck_assert_uint_eq(reg[1].grads, 77824);
    ck_assert_uint_eq(reg[1].adam_v, 86016);
    ck_assert_uint_eq(reg[1].fp32_bytes, 400);
    ck_assert_uint_eq(reg[2].weights, 90112);
    ck_assert_uint_eq(reg[2].fp32_bytes, 0);
    const rp_store_region *r = rp_store_layout_find(l, "layer.1.adam_m");
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(r->offset, reg[1].adam_m);
    ck_assert_uint_eq(r->bytes, 400);
    ck_assert_uint_eq(rp_store_layout_count(l), 1 + 15);

    /* Bad specs leave the layout as it was. */
    size_t before = rp_store_layout_bytes(l);
    rp_store_layer_spec bad[2] = {{10, 10}, {10, 11}};
    ck_assert_int_eq(rp_store_layout_add_layers(l, 2, bad, RP_F32, NULL, &err), RP_ERR_INVALID_ARG);
    ck_assert(strstr(err.msg, "layer 1"));
    /* a name clash part way through (layer.0.* exists) is rolled back too */
    rp_store_layer_spec ok[1] = {{1, 1}};
    ck_assert_int_eq(rp_store_layout_add_layers(l, 1, ok, RP_F32, NULL, &err), RP_ERR_INVALID_ARG);
    ck_assert_uint_eq(rp_store_layout_bytes(l), before);
    ck_assert_uint_eq(rp_store_layout_count(l), 16);
    rp_store_layout_destroy(&l);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("store_layout");
    TCase *t = tcase_create("layout");
    tcase_add_test(t, regions_are_aligned_and_disjoint);
    tcase_add_test(t, bad_regions_are_rejected_and_change_nothing);
    tcase_add_test(t, per_layer_blocks_have_hand_computed_sizes);
    suite_add_tcase(s, t);
    return s;
}

RP_TEST_MAIN(suite, "serial")
