package main

//go:generate sh -c "cd accounts && go tool gqlgen generate"
//go:generate sh -c "cd reviews && go tool gqlgen generate"
