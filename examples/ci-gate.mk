# CI performance gate on `mlb compare`'s exit code.
#
#   make -f examples/ci-gate.mk perf-gate BASELINE=baseline.json CANDIDATE=candidate.json
#
# Or include it from your own Makefile (`include examples/ci-gate.mk`). mlb compare exits
#   0  the gate passed (with FAIL_ON=regressed: no metric regressed)
#   1  the gate failed (a regression; with FAIL_ON=any also inconclusive or missing metrics)
#   2  bad input (missing, truncated or invalid result file, bad option)
#   3  not comparable (GPU, driver, CUDA, cuDNN, torch, dtype, golden parameters or subset differ)
# and this target fails the build on anything but 0, keeping mlb's exit code. The Markdown
# summary (table + attribution sentence) is written to COMPARE_MD for a CI comment.

MLB ?= mlb
BASELINE ?= mlb-results/baseline.json
CANDIDATE ?= mlb-results/candidate.json
FAIL_ON ?= regressed
COMPARE_MD ?= mlb-results/compare.md
COMPARE_FLAGS ?=

.PHONY: perf-gate
perf-gate:
	@mkdir -p "$(dir $(COMPARE_MD))"
	@$(MLB) compare "$(BASELINE)" "$(CANDIDATE)" --fail-on $(FAIL_ON) \
		--markdown "$(COMPARE_MD)" --force $(COMPARE_FLAGS); rc=$$?; \
	case $$rc in \
		0) echo "perf-gate: no regression ($(CANDIDATE) vs $(BASELINE))" ;; \
		1) echo "perf-gate: REGRESSION, see $(COMPARE_MD)" ;; \
		3) echo "perf-gate: NOT COMPARABLE, the environment or workload changed" ;; \
		*) echo "perf-gate: mlb compare failed (exit $$rc)" ;; \
	esac; \
	exit $$rc

# Against the history instead of one file: `mlb history gate` judges CANDIDATE against the last
# GATE_LAST comparable baselines of its branch in the history store (every `mlb run` records its
# result there; MLB_HISTORY=postgresql://user@host/db shares one store between CI runners), the
# spread between those baselines counted as measured noise. Same exit codes; 3 also when the
# history holds nothing comparable yet.
#
#   make -f examples/ci-gate.mk perf-gate-history CANDIDATE=mlb-results/new/baseline.json
GATE_LAST ?= 5

.PHONY: perf-gate-history
perf-gate-history:
	@$(MLB) history gate "$(CANDIDATE)" --last $(GATE_LAST) --fail-on $(FAIL_ON) \
		$(COMPARE_FLAGS); rc=$$?; \
	case $$rc in \
		0) echo "perf-gate-history: no regression against the last $(GATE_LAST) baselines" ;; \
		1) echo "perf-gate-history: REGRESSION against the history" ;; \
		3) echo "perf-gate-history: NOT COMPARABLE, or nothing comparable in the history yet" ;; \
		*) echo "perf-gate-history: mlb history gate failed (exit $$rc)" ;; \
	esac; \
	exit $$rc
