"""Running a pipeline and recording what one pass does: the forward, module hooks, the trace."""
