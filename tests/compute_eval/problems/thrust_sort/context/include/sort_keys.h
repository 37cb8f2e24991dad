#pragma once

// Sorts d_keys[0..n) (device memory) in ascending order, in place; done when it returns.
void sort_keys(int* d_keys, int n);
