/* params_diff A.ckpt B.ckpt TOLERANCE — exits 0 when every parameter tensor of two
 * checkpoints differs by at most TOLERANCE (||a − b|| / ||b||), 1 otherwise (and when either
 * cannot be read), printing the largest difference: how the MPI tests compare a run across
 * processes with the same training in one. */
#include <stdio.h>
#include <stdlib.h>

#include "../actors/compare.h"

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: params_diff A.ckpt B.ckpt TOLERANCE\n");
    return 2;
  }
  char worst[128];
  const double tol = strtod(argv[3], NULL), d = params_difference(argv[1], argv[2], worst, sizeof worst);
  printf("  largest relative difference %.3g (tensor %s), tolerance %.3g\n", d, worst, tol);
  return d <= tol ? 0 : 1;
}
