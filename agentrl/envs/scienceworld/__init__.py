"""env=scienceworld: ScienceWorld's simulator (a JVM behind py4j) as an agentrl environment."""
