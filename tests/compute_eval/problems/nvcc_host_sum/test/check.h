#pragma once

// The harness's own reference, in another translation unit (test/check.cu).
long long reference_sum(const int* values, int n);

// Compares host_sum's answer with the reference; prints and returns false on a mismatch.
bool check_sum(const char* name, const int* values, int n);
