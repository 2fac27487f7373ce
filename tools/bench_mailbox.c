#include "cli.h"
int bench_mailbox(int argc, char **argv) { (void)argc; (void)argv; return 0; }
