/* The tag of the sources a bmoe-top C extension was built from (bmoe_top/native_ext.py): setup.py
 * defines BMOE_SOURCE_TAG when it compiles this file into each extension. */
#ifndef BMOE_SOURCE_TAG
#error "BMOE_SOURCE_TAG is defined by setup.py"
#endif

const char bmoe_source_tag[] = BMOE_SOURCE_TAG;
