/* ScaLAPACK PDGEMM on a 2 x 2 process grid, C = B @ A-style GEMM of order n, timed.
 *
 * Built and launched by benchmarks/peers/scalapack.py with Debian's mpicc / mpiexec
 * (libscalapack-mpich-dev): the PyPI mpich wheel that distal's MPI runtime uses and
 * Debian's MPICH are separate installations, so this peer runs as its own small program.
 * Elements follow the same element functions as benchmarks/problems.py (sin of a linear
 * form of the global index). Prints one JSON line: the slowest rank's best time.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

extern void Cblacs_pinfo(int *, int *);
extern void Cblacs_get(int, int, int *);
extern void Cblacs_gridinit(int *, const char *, int, int);
extern void Cblacs_gridinfo(int, int *, int *, int *, int *);
extern void Cblacs_gridexit(int);
extern int numroc_(const int *, const int *, const int *, const int *, const int *);
extern void descinit_(int *, const int *, const int *, const int *, const int *, const int *,
                      const int *, const int *, const int *, int *);
extern void pdgemm_(const char *, const char *, const int *, const int *, const int *,
                    const double *, const double *, const int *, const int *, const int *,
                    const double *, const int *, const int *, const int *, const double *,
                    double *, const int *, const int *, const int *);

static double elem(int seed, long i, long j) {
  double w0 = 0.0007 * (seed + 1), w1 = w0 + 0.00031;
  return sin(w0 * i + w1 * j + 0.1 * seed);
}

/* fill the local part of a block-cyclic matrix */
static void fill(double *a, int seed, int n, int nb, int myr, int myc, int pr, int pc, int lld,
                 int lcols) {
  for (int lj = 0; lj < lcols; lj++) {
    long gj = (long)((lj / nb) * pc + myc) * nb + lj % nb;
    for (int li = 0; li < lld; li++) {
      long gi = (long)((li / nb) * pr + myr) * nb + li % nb;
      a[(long)lj * lld + li] = gi < n && gj < n ? elem(seed, gi, gj) : 0.0;
    }
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int n = argc > 1 ? atoi(argv[1]) : 4096, nb = argc > 2 ? atoi(argv[2]) : 256;
  int repeat = argc > 3 ? atoi(argv[3]) : 3;
  int me, np, ctxt, pr = 2, pc = 2, myr, myc, zero = 0, one = 1, info;
  Cblacs_pinfo(&me, &np);
  Cblacs_get(-1, 0, &ctxt);
  Cblacs_gridinit(&ctxt, "Row", pr, pc);
  Cblacs_gridinfo(ctxt, &pr, &pc, &myr, &myc);
  int lr = numroc_(&n, &nb, &myr, &zero, &pr), lc = numroc_(&n, &nb, &myc, &zero, &pc);
  int lld = lr > 1 ? lr : 1, da[9], db[9], dc[9];
  descinit_(da, &n, &n, &nb, &nb, &zero, &zero, &ctxt, &lld, &info);
  descinit_(db, &n, &n, &nb, &nb, &zero, &zero, &ctxt, &lld, &info);
  descinit_(dc, &n, &n, &nb, &nb, &zero, &zero, &ctxt, &lld, &info);
  double *b = malloc(sizeof(double) * lld * lc), *c = malloc(sizeof(double) * lld * lc);
  double *a = calloc((size_t)lld * lc, sizeof(double));
  fill(b, 0, n, nb, myr, myc, pr, pc, lld, lc);
  fill(c, 1, n, nb, myr, myc, pr, pc, lld, lc);
  double alpha = 1.0, beta = 0.0, times[64];
  for (int r = 0; r <= repeat && r < 64; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    pdgemm_("N", "N", &n, &n, &n, &alpha, b, &one, &one, db, c, &one, &one, dc, &beta, a, &one,
            &one, da);
    double t = MPI_Wtime() - t0, tmax;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    times[r] = tmax;
  }
  double local = 0, total;
  for (long x = 0; x < (long)lld * lc; x++) local += a[x];
  MPI_Reduce(&local, &total, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  if (me == 0) {
    printf("{\"times\": [");
    for (int r = 1; r <= repeat; r++) printf("%s%.6f", r > 1 ? ", " : "", times[r]);
    printf("], \"checksum\": %.12e, \"nb\": %d}\n", total, nb);
  }
  free(a); free(b); free(c);
  Cblacs_gridexit(ctxt);
  MPI_Finalize();
  return 0;
}
