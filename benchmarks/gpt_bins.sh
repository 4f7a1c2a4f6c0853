# Sourced by the benchmarks of the example GPT: sets $zerorun and $train from $BUILD_DIR and exits
# 2 with the build command when either is missing.
zerorun="$BUILD_DIR/bin/zerorun"
train="$BUILD_DIR/bin/gpt_train"
for f in "$zerorun" "$train"; do
  [ -x "$f" ] || { echo "run.sh: $f not built (cmake --build $BUILD_DIR --target zerorun gpt_train)" >&2; exit 2; }
done
