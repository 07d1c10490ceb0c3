"""env=scienceworld: ScienceWorld's simulator (a JVM behind py4j) as an agentrl environment (`adapter`): EPO's
train, dev and test variations as agentrl's splits, success at a score of 100, the action templates and the
objects in view in the prompt, and the GiGPO anchor from the engine's object tree or the observation text. It
needs the scienceworld extra and a Java runtime. It may import the shared modules at the top of agentrl/ and the
rest of `envs` (`base`); the registry imports it lazily, so that listing environments never starts the engine."""
