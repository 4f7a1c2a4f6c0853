// Carries the precompiled LibTorch header for the executables (PIE objects).
int main() {
  return 0;
}
