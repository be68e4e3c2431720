/* A second translation unit including the header: it must compile and link twice over. */
#include "vlc_compress.h"

int second_unit_version_ok(void) {
    return vlcc_version_number() == VLCC_VERSION_NUMBER && vlcc_abi_version() == VLCC_ABI_VERSION;
}
