/* A block's or an expert's number inside a tensor or module name, in the
 * one form transformers and PEFT write it ("model.layers.12.", "experts.3."):
 * decimal digits, no sign, no blank, no leading zero ("0" itself excepted).
 * Any other spelling ("05", "+5", " 5") names a module the model does not
 * have, so readers refuse it instead of taking it for block 5. */
#ifndef RP_IO_NAME_INDEX_H
#define RP_IO_NAME_INDEX_H

/* The number p starts with, or -1 when p does not start with one in that
 * form or it is above limit (>= 0). *end, when end is not NULL, is set
 * just past its digits (to p on -1). */
long long rp_name_index(const char *p, const char **end, long long limit);

#endif
