"""costmodel: TIR graphs of scheduled programs, the GraphSAGE latency model and its inference API.

Not built yet: see the project's cost-model issue. The dataset it learns from is produced by
`datagen`.
"""
