#pragma once
// Chi-square goodness of fit for the distribution tests of speculative sampling.
#include <cmath>
#include <vector>

namespace specula::testing_support {

// ---- Chi-square -----------------------------------------------------------------------------
// The survival function of the chi-square distribution is the regularized upper incomplete
// gamma function Q(dof / 2, stat / 2). Written here because neither the standard library nor
// GoogleTest has it, and one test does not justify a Boost.Math dependency. Q is evaluated from
// its power series (x < a + 1) or its continued fraction (otherwise), both accurate to ~1e-14.
inline double regularized_upper_gamma(double a, double x) {
  if (x <= 0) return 1.0;
  const double log_prefactor = -x + a * std::log(x) - std::lgamma(a);  // log(x^a e^-x / Gamma(a))
  const double eps = 1e-15;
  if (x < a + 1) {
    // P(a, x) = x^a e^-x / Gamma(a + 1) * sum_n x^n / ((a + 1) ... (a + n))
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 10000 && std::fabs(term) > std::fabs(sum) * eps; ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return 1.0 - sum * std::exp(log_prefactor);
  }
  // Q(a, x) = x^a e^-x / Gamma(a) * 1 / (x + 1 - a - 1 (1 - a) / (x + 3 - a - 2 (2 - a) / (x + 5 - a - ...))),
  // evaluated front to back with the modified Lentz method.
  const double tiny = 1e-300;
  double b = x + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < eps) break;
  }
  return std::exp(log_prefactor) * h;
}

inline double chi_square_survival(double stat, int dof) { return regularized_upper_gamma(dof / 2.0, stat / 2.0); }

struct ChiSquareResult {
  double stat = 0;
  int dof = 0;
  double p_value = 1;
  long impossible = 0;  // draws in cells the target gives probability 0
};

// observed counts vs n * expected probabilities; cells with probability 0 are left out of the
// statistic, and any draw in them fails the test on its own.
inline ChiSquareResult chi_square(const std::vector<long>& observed, const std::vector<double>& expected, long n) {
  ChiSquareResult r;
  int cells = 0;
  for (size_t i = 0; i < observed.size(); ++i) {
    if (expected[i] <= 0) {
      r.impossible += observed[i];
      continue;
    }
    const double e = expected[i] * static_cast<double>(n);
    r.stat += (static_cast<double>(observed[i]) - e) * (static_cast<double>(observed[i]) - e) / e;
    ++cells;
  }
  r.dof = cells - 1;
  r.p_value = r.impossible > 0 ? 0.0 : chi_square_survival(r.stat, r.dof);
  return r;
}

}  // namespace specula::testing_support
