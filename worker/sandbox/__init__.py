"""The OS sandbox commands run in: bubblewrap, cgroups, seccomp, disk quota, the lease's
fence, the egress proxy and its allow-list."""
