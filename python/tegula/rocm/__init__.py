"""TileLang's AMD backend is not part of Tegula (docs/porting.md, Out of scope): this
package answers only the question CUDA programs ask of it."""
