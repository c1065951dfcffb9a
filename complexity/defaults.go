package complexity

import (
	"fmt"
	"slices"
)

// Schema defaults are priced once, by New: a default is a constant, and
// coercion fills in the defaults of the input fields a value leaves out,
// inside a default too (input In { a: Int, b: Int = 5 } makes a default
// {a: 1} worth {a: 1, b: 5}). Each default's price is kept on its argument
// or input field, so a value, however nested, is priced in time linear in
// what it writes, and a default that would fill itself in without end
// (input R { next: R = {} }) refuses the schema: the executor would
// recurse forever coercing it.

// defaultCycle is why a default is refused: filling in the defaults inside
// it reaches it again.
const defaultCycle = "a default that fills itself in without end"

// priceDefaults prices the default of every input field, then of every
// field argument, in name order so a refusal names the same field each
// time.
func (c *compiled) priceDefaults() error {
	w := &walker{c: c}
	names := make([]string, 0, len(c.types))
	for name := range c.types {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		for _, in := range c.types[name].inputFields {
			if err := w.priceDefault(in, "input field "+name+"."+in.name); err != nil {
				return err
			}
		}
	}
	for _, name := range names {
		ti := c.types[name]
		for _, fd := range ti.def.Fields {
			fi := ti.fields[fd.Name]
			if fi == nil {
				continue
			}
			for _, in := range fi.args {
				if err := w.priceDefault(in, "argument "+fi.coord+"("+in.name+":)"); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// priceDefault prices in's default once; where names in for the error of a
// default that fills itself in without end.
func (w *walker) priceDefault(in *inputInfo, where string) error {
	if in.byDefault.state != defaultUnpriced {
		return nil
	}
	_, bad := w.costByDefault(in)
	if bad != nil && bad.reason == defaultCycle {
		return fmt.Errorf("%w: %s: its default value fills itself in without end (at %s)", ErrInvalidSchema, where, bad.at)
	}
	return nil
}

// costByDefault is what in costs when no value is given for it: its
// default's price, or nothing without a default. New prices each default
// the first time it is reached (an unpriced one only exists while New
// runs); afterwards only a default the executor would refuse is priced
// again, to report its error.
func (w *walker) costByDefault(in *inputInfo) (Cost, *invalidValue) {
	switch in.byDefault.state {
	case defaultFree:
		return 0, nil
	case defaultPriced:
		return in.byDefault.cost, nil
	case defaultPricing:
		return 0, &invalidValue{v: value{lit: in.def}, typ: in.typ.String(), reason: defaultCycle}
	case defaultPriceEachTime:
		return w.costOfDefault(in)
	}
	if in.def == nil {
		in.byDefault.state = defaultFree
		return 0, nil
	}
	in.byDefault.state = defaultPricing
	cost, bad := w.costOfDefault(in)
	switch {
	case bad != nil && bad.reason == defaultCycle:
		return 0, bad // New fails
	case bad != nil:
		in.byDefault = defaultCost{state: defaultPriceEachTime}
	case cost == 0:
		in.byDefault = defaultCost{state: defaultFree}
	default:
		in.byDefault = defaultCost{state: defaultPriced, cost: cost}
	}
	return cost, bad
}

// costOfDefault prices in's default value, a constant.
func (w *walker) costOfDefault(in *inputInfo) (Cost, *invalidValue) {
	v, ok := w.resolve(in.def)
	if !ok {
		return 0, nil
	}
	return w.valueCost(v, in.typ, in)
}
