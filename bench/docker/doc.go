// Package docker is the Docker half of issue 14's performance target:
// `docker run --rm IMAGE /bin/true` through runtime cordon and runtime
// runc, interleaved in one run on one private dockerd, and the time spent
// inside each runtime binary (its create, start, state, kill and delete
// calls, timed by a wrapper registered as a second runtime). bench/docker.sh
// runs it; it must never run as part of the ordinary test suite (it does
// nothing unless CORDON_BENCH_DOCKER=1).
package docker
