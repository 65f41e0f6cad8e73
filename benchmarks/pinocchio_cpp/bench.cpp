// Times Pinocchio's C++ algorithms the way a C++ user calls them (no Python in the loop).
//
// Usage:
//   bench <urdf> <floating:0|1> <n_states> <min_time_s> <repeats>
//       Prints one JSON object: versions, compiler, flags, nq, nv and, per algorithm,
//       {"best": ns, "median": ns} per call (best / median over `repeats` repeats).
//   bench <urdf> <floating:0|1> --check <file>
//       Reads q, v, a, tau (one whitespace-separated line each) from <file> and prints
//       {"rnea": [...], "aba": [...]} with 17 significant digits, to compare against the
//       Python bindings on the same inputs.
//
// Built by benchmarks/pinocchio_cpp.py, which passes the compile flags in BENCH_FLAGS.
// Algorithms (all single-threaded, default conventions, one shared pinocchio::Data):
//   rnea              pinocchio::rnea(model, data, q, v, a)
//   crba              pinocchio::crba(model, data, q)          upper triangle of M only
//   crba_full         crba, then the strictly lower triangle mirrored from the upper one
//                     (Pinocchio's documented idiom): the full symmetric M jaxdyn returns
//   aba               pinocchio::aba(model, data, q, v, tau)
//   minv              pinocchio::computeMinverse(model, data, q) upper triangle of M^-1 only
//   minv_full         computeMinverse, then mirrored as crba_full
//   rnea_derivatives  pinocchio::computeRNEADerivatives(model, data, q, v, a)
//   aba_derivatives   pinocchio::computeABADerivatives(model, data, q, v, tau)
//   fk                pinocchio::forwardKinematics(model, data, q)
//   jacobians         pinocchio::computeJointJacobians(model, data, q)
//   ccrba             pinocchio::ccrba(model, data, q, v)      A_G, h_G and the centre of mass
//   centroidal_bias   pinocchio::computeCentroidalMomentumTimeVariation(model, data, q, v, 0)
//                                                             (h_G and dh_G/dt = Adot_G v)
//   coriolis          pinocchio::computeCoriolisMatrix(model, data, q, v)
//   frame_velocity    forwardKinematics(model, data, q, v) and getFrameVelocity of the model's
//                     last frame (named in the output) in LOCAL_WORLD_ALIGNED
//   frame_acceleration  forwardKinematics(model, data, q, v, a) and
//                     getFrameClassicalAcceleration of that frame in LOCAL_WORLD_ALIGNED

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "pinocchio/algorithm/aba-derivatives.hpp"
#include "pinocchio/algorithm/aba.hpp"
#include "pinocchio/algorithm/centroidal.hpp"
#include "pinocchio/algorithm/crba.hpp"
#include "pinocchio/algorithm/frames.hpp"
#include "pinocchio/algorithm/jacobian.hpp"
#include "pinocchio/algorithm/joint-configuration.hpp"
#include "pinocchio/algorithm/kinematics.hpp"
#include "pinocchio/algorithm/rnea-derivatives.hpp"
#include "pinocchio/algorithm/rnea.hpp"
#include "pinocchio/multibody.hpp"
#include "pinocchio/parsers/urdf.hpp"

#ifndef BENCH_FLAGS
#define BENCH_FLAGS "unknown"
#endif

#if defined(__clang__)
#define BENCH_COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define BENCH_COMPILER "GCC " __VERSION__
#else
#define BENCH_COMPILER "unknown"
#endif

namespace
{
  using Model = pinocchio::Model;
  using Data = pinocchio::Data;
  using VectorXd = Eigen::VectorXd;
  using Clock = std::chrono::steady_clock;

  // Keeps the value (and everything it depends on) alive without emitting any code.
  template<typename T>
  inline void doNotOptimize(const T & value)
  {
    asm volatile("" : : "r,m"(value) : "memory");
  }

  volatile double g_sink = 0.0;

  struct States
  {
    std::vector<VectorXd> q, v, a, tau;
  };

  Model loadModel(const std::string & urdf, bool floating)
  {
    Model model;
    if (floating)
    {
      pinocchio::urdf::buildModel(urdf, pinocchio::JointModelFreeFlyer(), model);
      // randomConfiguration needs finite bounds: the free flyer's translation has none.
      model.lowerPositionLimit.head<3>().setConstant(-1.0);
      model.upperPositionLimit.head<3>().setConstant(1.0);
    }
    else
    {
      pinocchio::urdf::buildModel(urdf, model);
    }
    return model;
  }

  States randomStates(const Model & model, int n)
  {
    std::srand(0); // randomConfiguration and Eigen's Random draw from std::rand
    States s;
    for (int i = 0; i < n; ++i)
    {
      s.q.push_back(pinocchio::randomConfiguration(model));
      s.v.push_back(VectorXd::Random(model.nv));   // uniform in [-1, 1]
      s.a.push_back(VectorXd::Random(model.nv));   // uniform in [-1, 1]
      s.tau.push_back(VectorXd::Random(model.nv)); // uniform in [-1, 1]
    }
    return s;
  }

  // Calls `body(i)` for i = start, start+1, ... (cyclic over the states), `count` times;
  // returns the elapsed seconds.
  template<typename Body>
  double runLoop(const Body & body, std::size_t n_states, long count)
  {
    const auto t0 = Clock::now();
    std::size_t i = 0;
    for (long k = 0; k < count; ++k)
    {
      body(i);
      if (++i == n_states)
        i = 0;
    }
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

  template<typename Body>
  std::pair<double, double>
  timeOne(const Body & body, std::size_t n_states, double min_time, int repeats)
  {
    // Warm up (touch every state once), then calibrate the count so one repeat lasts
    // at least min_time.
    runLoop(body, n_states, static_cast<long>(n_states));
    long count = 1;
    for (;;)
    {
      const double t = runLoop(body, n_states, count);
      if (t >= min_time)
        break;
      const double grow = t > 0 ? 1.2 * min_time / t : 10.0;
      count = static_cast<long>(count * std::min(std::max(grow, 2.0), 100.0)) + 1;
    }
    std::vector<double> ns;
    for (int r = 0; r < repeats; ++r)
      ns.push_back(runLoop(body, n_states, count) * 1e9 / static_cast<double>(count));
    std::sort(ns.begin(), ns.end());
    const std::size_t m = ns.size();
    const double median = m % 2 ? ns[m / 2] : 0.5 * (ns[m / 2 - 1] + ns[m / 2]);
    return {ns.front(), median};
  }

  std::string eigenVersion()
  {
    std::ostringstream os;
    os << EIGEN_WORLD_VERSION << "." << EIGEN_MAJOR_VERSION << "." << EIGEN_MINOR_VERSION;
    return os.str();
  }

  std::string jsonString(const std::string & s)
  {
    std::string out = "\"";
    for (char c : s)
    {
      if (c == '"' || c == '\\')
        out += '\\';
      out += c;
    }
    return out + "\"";
  }

  std::string jsonArray(const VectorXd & x)
  {
    std::string out = "[";
    char buf[64];
    for (Eigen::Index i = 0; i < x.size(); ++i)
    {
      std::snprintf(buf, sizeof buf, "%s%.17g", i ? ", " : "", x[i]);
      out += buf;
    }
    return out + "]";
  }

  VectorXd readLine(std::istream & in, Eigen::Index n, const char * what)
  {
    std::string line;
    if (!std::getline(in, line))
      throw std::runtime_error(std::string("--check file: missing line for ") + what);
    std::istringstream ls(line);
    std::vector<double> vals;
    double x;
    while (ls >> x)
      vals.push_back(x);
    if (static_cast<Eigen::Index>(vals.size()) != n)
      throw std::runtime_error(
        std::string("--check file: ") + what + " has " + std::to_string(vals.size())
        + " values, expected " + std::to_string(n));
    return Eigen::Map<VectorXd>(vals.data(), n);
  }

  int check(const Model & model, const std::string & path)
  {
    std::ifstream in(path);
    if (!in)
      throw std::runtime_error("cannot open " + path);
    const VectorXd q = readLine(in, model.nq, "q");
    const VectorXd v = readLine(in, model.nv, "v");
    const VectorXd a = readLine(in, model.nv, "a");
    const VectorXd tau = readLine(in, model.nv, "tau");
    Data data(model);
    const VectorXd rnea = pinocchio::rnea(model, data, q, v, a);
    const VectorXd aba = pinocchio::aba(model, data, q, v, tau);
    std::cout << "{\"rnea\": " << jsonArray(rnea) << ", \"aba\": " << jsonArray(aba) << "}\n";
    return 0;
  }

  int bench(const Model & model, int n_states, double min_time, int repeats)
  {
    Data data(model);
    const States s = randomStates(model, n_states);
    const std::size_t n = s.q.size();

    std::ostringstream times;
    auto record = [&](const char * name, const auto & body) {
      const auto best_median = timeOne(body, n, min_time, repeats);
      char buf[160];
      std::snprintf(
        buf, sizeof buf, "%s\"%s\": {\"best\": %.1f, \"median\": %.1f}",
        times.tellp() > 0 ? ", " : "", name, best_median.first, best_median.second);
      times << buf;
    };

    // Each body reads one output element so the call's result is observably used.
    record("rnea", [&](std::size_t i) {
      pinocchio::rnea(model, data, s.q[i], s.v[i], s.a[i]);
      doNotOptimize(data.tau[0]);
    });
    record("crba", [&](std::size_t i) {
      pinocchio::crba(model, data, s.q[i]);
      doNotOptimize(data.M(0, 0));
    });
    // crba / computeMinverse then the mirror Pinocchio documents for a full symmetric matrix
    // (what jaxdyn's crba and minv return): the like-for-like cost
    record("crba_full", [&](std::size_t i) {
      pinocchio::crba(model, data, s.q[i]);
      data.M.triangularView<Eigen::StrictlyLower>() =
        data.M.transpose().triangularView<Eigen::StrictlyLower>();
      doNotOptimize(data.M(model.nv - 1, 0));
    });
    record("aba", [&](std::size_t i) {
      pinocchio::aba(model, data, s.q[i], s.v[i], s.tau[i]);
      doNotOptimize(data.ddq[0]);
    });
    record("minv", [&](std::size_t i) {
      pinocchio::computeMinverse(model, data, s.q[i]);
      doNotOptimize(data.Minv(0, 0));
    });
    record("minv_full", [&](std::size_t i) {
      pinocchio::computeMinverse(model, data, s.q[i]);
      data.Minv.triangularView<Eigen::StrictlyLower>() =
        data.Minv.transpose().triangularView<Eigen::StrictlyLower>();
      doNotOptimize(data.Minv(model.nv - 1, 0));
    });
    record("rnea_derivatives", [&](std::size_t i) {
      pinocchio::computeRNEADerivatives(model, data, s.q[i], s.v[i], s.a[i]);
      doNotOptimize(data.dtau_dq(0, 0));
    });
    record("aba_derivatives", [&](std::size_t i) {
      pinocchio::computeABADerivatives(model, data, s.q[i], s.v[i], s.tau[i]);
      doNotOptimize(data.ddq_dq(0, 0));
    });
    record("fk", [&](std::size_t i) {
      pinocchio::forwardKinematics(model, data, s.q[i]);
      doNotOptimize(data.oMi.back().translation()[0]);
    });
    record("jacobians", [&](std::size_t i) {
      pinocchio::computeJointJacobians(model, data, s.q[i]);
      doNotOptimize(data.J(0, 0));
    });
    record("ccrba", [&](std::size_t i) {
      pinocchio::ccrba(model, data, s.q[i], s.v[i]);
      doNotOptimize(data.Ag(0, 0));
    });
    const Eigen::VectorXd zero_a = Eigen::VectorXd::Zero(model.nv);
    record("centroidal_bias", [&](std::size_t i) {
      pinocchio::computeCentroidalMomentumTimeVariation(model, data, s.q[i], s.v[i], zero_a);
      doNotOptimize(data.dhg.linear()[0]);
    });
    record("coriolis", [&](std::size_t i) {
      pinocchio::computeCoriolisMatrix(model, data, s.q[i], s.v[i]);
      doNotOptimize(data.C(0, 0));
    });
    const auto fid = static_cast<pinocchio::FrameIndex>(model.nframes - 1);
    record("frame_velocity", [&](std::size_t i) {
      pinocchio::forwardKinematics(model, data, s.q[i], s.v[i]);
      const auto m = pinocchio::getFrameVelocity(model, data, fid, pinocchio::LOCAL_WORLD_ALIGNED);
      doNotOptimize(m.linear()[0]);
    });
    record("frame_acceleration", [&](std::size_t i) {
      pinocchio::forwardKinematics(model, data, s.q[i], s.v[i], s.a[i]);
      const auto m =
        pinocchio::getFrameClassicalAcceleration(model, data, fid, pinocchio::LOCAL_WORLD_ALIGNED);
      doNotOptimize(m.linear()[0]);
    });
    g_sink = data.tau[0] + data.M(0, 0) + data.ddq[0] + data.Minv(0, 0);

    std::cout << "{\"pinocchio_version\": " << jsonString(PINOCCHIO_VERSION)
              << ", \"eigen_version\": " << jsonString(eigenVersion())
              << ", \"compiler\": " << jsonString(BENCH_COMPILER)
              << ", \"flags\": " << jsonString(BENCH_FLAGS) << ", \"nq\": " << model.nq
              << ", \"nv\": " << model.nv << ", \"n_states\": " << n
              << ", \"min_time_s\": " << min_time << ", \"repeats\": " << repeats
              << ", \"notes\": {\"crba\": "
              << jsonString("upper triangle of M only (Pinocchio's crba leaves the strictly "
                            "lower triangle unset)")
              << ", \"minv\": " << jsonString("upper triangle of M^-1 only")
              << ", \"crba_full\": "
              << jsonString("full symmetric M (crba, then the strictly lower triangle mirrored)")
              << ", \"minv_full\": "
              << jsonString("full symmetric M^-1 (computeMinverse, then mirrored)")
              << ", \"frame\": " << jsonString(model.frames[fid].name)
              << "}, \"ns_per_call\": {" << times.str() << "}}\n";
    return 0;
  }

  int usage(const char * argv0)
  {
    std::cerr << "usage: " << argv0 << " <urdf> <floating:0|1> <n_states> <min_time_s> <repeats>\n"
              << "       " << argv0 << " <urdf> <floating:0|1> --check <file>\n";
    return 2;
  }
} // namespace

int main(int argc, char ** argv)
{
  try
  {
    if (argc == 5 && std::string(argv[3]) == "--check")
      return check(loadModel(argv[1], std::atoi(argv[2]) != 0), argv[4]);
    if (argc != 6)
      return usage(argv[0]);
    const int n_states = std::atoi(argv[3]);
    const double min_time = std::atof(argv[4]);
    const int repeats = std::atoi(argv[5]);
    if (n_states < 1 || repeats < 1 || !(min_time > 0))
      return usage(argv[0]);
    return bench(loadModel(argv[1], std::atoi(argv[2]) != 0), n_states, min_time, repeats);
  }
  catch (const std::exception & e)
  {
    std::cerr << "bench: " << e.what() << "\n";
    return 1;
  }
}
