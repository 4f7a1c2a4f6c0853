// Carries the precompiled LibTorch header for the libraries (position-independent objects).
