#pragma once

// Sets y[i] = value for 0 <= i < n.
void fill_value(int n, float value, float* y);

// y[i] = a * x[i] + y[i] for 0 <= i < n.
void saxpy(int n, float a, const float* x, float* y);
