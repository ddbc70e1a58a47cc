/* gNMI encoder fast path: owned by the gNMI work (issue 3). Placeholder table
 * so the module links until the encoder lands. */
#include "swtel.h"

PyMethodDef swtel_encode_methods[] = {
    {NULL, NULL, 0, NULL},
};
