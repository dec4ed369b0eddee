# Checks that a GGUF which make-model wrote at build time is the one its golden fixture was made from: the
# sha256 the fixture's JSON names (model.sha256). A mismatch means make-model's output changed since the
# fixture was made (tools/golden_maker/README.md says how to make it again); the file is removed, so that no
# test runs against the wrong model.
# Usage: cmake -DGGUF=<file> -DJSON=<fixture.json> -P check_model.cmake
file(SHA256 "${GGUF}" actual)
file(READ "${JSON}" meta)
string(JSON expected GET "${meta}" model sha256)
if(NOT actual STREQUAL expected)
  file(REMOVE "${GGUF}")
  message(FATAL_ERROR "${GGUF}: sha256 ${actual}, but its golden fixture ${JSON} was made from ${expected}: "
                      "make-model writes other bytes than when the fixture was made; make the fixture again "
                      "(tools/golden_maker/README.md)")
endif()
