"""The kernel sweep: batch kinds, metadata, inputs, timing, the sweep loop, roofline, backends."""
