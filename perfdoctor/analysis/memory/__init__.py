"""Device and host memory: peaks, the memory over the step, allocator calls, headroom, growth over the run."""
