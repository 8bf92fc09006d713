package main

import "github.com/floodgate/floodgate/sim"

func init() {
	commands["sim"] = command{"simulate algorithms and distributed strategies against a perfect window", sim.MainContext}
}
