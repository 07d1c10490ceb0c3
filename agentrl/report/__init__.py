"""Reading finished runs: `agentrl report`'s comparison of configurations over seeds (`compare`), its tables
(`tables`) and plot (`plot`), the learning-curve pictures every run leaves (`curves`), and a seed study's
statistics (`study`). It reads run folders and metric logs only, so it sits low: it may import the shared
modules at the top of agentrl/ and `algos` (the step-credit diagnostics' names), nothing else; training
imports `curves` to draw a run's own curves."""
