// Runs choose_coretype() (kernels/cpu/blas_coretype.h) on cases read from stdin, one per line:
// "<detected core>|<cpu SimdLevel>|<user OPENBLAS_CORETYPE or empty>|<dynamic_arch 0/1>", and prints
// "<force>|<why>" per line. Compiled and driven by blas-coretype.test.ts.
#include <iostream>
#include <sstream>
#include <string>

#include "cpu/blas_coretype.h"

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::stringstream in(line);
    std::string detected, level, user, dynamic;
    std::getline(in, detected, '|');
    std::getline(in, level, '|');
    std::getline(in, user, '|');
    std::getline(in, dynamic, '|');
    const auto c = rs::blas::choose_coretype(detected, std::stoi(level), user.c_str(), dynamic == "1");
    std::cout << c.force << "|" << c.why << "\n";
  }
  return 0;
}
