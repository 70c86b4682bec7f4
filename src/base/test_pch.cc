// The translation unit that builds the test binaries' shared precompiled header (CMakeLists.txt,
// cloister_test_pch); it has no code of its own.
