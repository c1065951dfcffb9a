package main

// clientKinds are the clients the clients scenario runs, in order.
func clientKinds() []clientKind {
	return []clientKind{naiveClient}
}
