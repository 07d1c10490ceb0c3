"""env=alfworld: the real ALFWorld text engine, on the published splits or on games agentrl generates. The suite
and its environment (`adapter`), where games live and how splits are named (`data`), the TextWorld engine loaded
as ALFWorld loads it and the planner's walkthrough (`engine`), and the synthetic games: the floor plans and
placement rules (`floorplans`), one game drawn (`draw`), which split a layout belongs to (`signatures`), and the
games checked by the planner and written in the download's layout (`generate`). `data` and `signatures` read
folders and text only; the rest needs the alfworld extra when called. It may import the shared modules at the top
of agentrl/ and the rest of `envs` (`base`); the registry (lazily, by its builder's path) and the CLI
(`agentrl alfworld generate`) import it."""
